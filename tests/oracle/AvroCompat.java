// The Avro compatibility oracle: Apache Avro's own org.apache.avro.SchemaCompatibility.
//
// Reads JSON lines from stdin, each {"id": str, "refs": [schema...], "reader": schema, "writer": schema}
// (refs: named types the two schemas reference, parsed first into the same Schema.Parser, as a
// registry resolves schema references). Writes one JSON line per input line:
// {"id": str, "verdict": "COMPATIBLE" | "INCOMPATIBLE" | "INVALID", "detail": str}.
// INVALID: Schema.Parser rejected one of the schemas (its message in detail).
// One JVM runs every pair: compiled and started once by tests/oracle/oracle.py.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.apache.avro.Schema;
import org.apache.avro.SchemaCompatibility;

public final class AvroCompat {
  private static Schema parse(JsonNode refs, JsonNode schema) {
    Schema.Parser parser = new Schema.Parser();
    if (refs != null) {
      for (JsonNode ref : refs) {
        parser.parse(ref.toString());
      }
    }
    return parser.parse(schema.toString());
  }

  public static void main(String[] args) throws Exception {
    ObjectMapper mapper = new ObjectMapper();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintStream out = new PrintStream(System.out, true, "UTF-8");
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      JsonNode pair = mapper.readTree(line);
      ObjectNode answer = mapper.createObjectNode();
      answer.put("id", pair.get("id").asText());
      try {
        Schema reader = parse(pair.get("refs"), pair.get("reader"));
        Schema writer = parse(pair.get("refs"), pair.get("writer"));
        SchemaCompatibility.SchemaPairCompatibility result =
            SchemaCompatibility.checkReaderWriterCompatibility(reader, writer);
        answer.put("verdict", result.getType().toString());
        answer.put("detail", result.getResult().getIncompatibilities().toString());
      } catch (RuntimeException e) {
        answer.put("verdict", "INVALID");
        answer.put("detail", e.getClass().getSimpleName() + ": " + e.getMessage());
      }
      out.println(mapper.writeValueAsString(answer));
    }
  }
}
