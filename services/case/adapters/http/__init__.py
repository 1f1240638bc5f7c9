"""The case service's HTTP API: app and routes, request reading, models, problem details,
OpenAPI document."""
