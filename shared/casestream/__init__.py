"""casestream common library: envelope, Avro codec, registry, outbox, relay, consumer runtime."""
