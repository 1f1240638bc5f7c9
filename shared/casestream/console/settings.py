"""Settings of the web console (``casestream console``). Variables ``CASESTREAM_CONSOLE_<FIELD>``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ConsoleSettings"]


class ConsoleSettings(BaseSettings):
    """Where the console listens and what it shows. Every list is optional: empty means
    "discovered" (the installed services, their consumers, the topics of their catalogs),
    so a team points the console at its own services by configuration alone."""

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_CONSOLE_", extra="ignore")

    host: str = Field("127.0.0.1", description="HTTP listen address")
    port: int = Field(18100, ge=1, le=65535, description="HTTP listen port")
    services: dict[str, str] = Field(
        default_factory=dict,
        description='service name -> base URL as JSON, e.g. {"billing": "http://billing:8080"} '
                    "(empty: the installed services on 127.0.0.1:<their port>)")
    consumers: list[str] = Field(
        default_factory=list,
        description="consumer names (= group ids) whose dead letters and lag are shown, JSON list "
                    "(empty: the consumers of the services, and every <consumer>.dlq topic)")
    journey_topics: list[str] = Field(
        default_factory=list,
        description="topics a journey is read from, JSON list (empty: the topics of the catalog)")
    journey_max_messages: int = Field(
        200_000, ge=1, description="newest messages read per topic for a journey (older events of a "
                                   "case are not shown)")
    journey_timeout_s: float = Field(
        30.0, gt=0, description="seconds a journey's read of its topics may wait for messages before the "
                                "page answers 503 (each metadata and watermark request has as long)")
    sagas_url: str = Field(
        "", description="base URL of the service answering /sagas (empty: the configured service "
                        "whose /openapi.json has /sagas/{saga_id}/resolve)")
    review_states: list[str] = Field(
        default_factory=lambda: ["MANUAL_REVIEW"],
        description="saga states listed for a supervisor's resolve action, JSON list")
    failed_states: list[str] = Field(
        default_factory=lambda: ["COMPENSATION_FAILED"],
        description="saga states listed as failed compensations, JSON list")
    replay_databases: list[str] = Field(
        default_factory=list,
        description="PostgreSQL URLs of the projection databases whose replay runs the Flow page "
                    "lists, JSON list (empty: the databases of the installed projections)")
    replay_runs_shown: int = Field(20, ge=1, description="replay runs listed on the Flow page, newest first")
    replay_runs_idle_s: float = Field(
        10.0, ge=0, description="how long the Flow page shows the replay runs it read while none is "
                                "running, seconds (while one runs: read again at most once a second)")
    request_timeout_s: float = Field(5.0, gt=0, description="timeout of each call to a service, seconds")
    cookie_secure: bool | None = Field(
        None, description="send the session cookie over HTTPS only, named with the __Host- prefix "
                          "(RFC 6265bis §4.1.3.2); empty: true when CASESTREAM_ENV=production")
    session_ttl_s: float = Field(
        900.0, gt=0, description="lifetime of a console session, seconds (never past the token's exp); "
                                 "logging out ends it at once")
    max_sessions: int = Field(10_000, ge=1, description="console sessions kept in memory (oldest dropped)")
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="origins (scheme://host[:port]) a form may be posted from besides the console's "
                    "own host, JSON list (a TLS proxy in front that rewrites Host)")
    max_body_bytes: int = Field(16 * 1024, ge=1, description="largest form body accepted, bytes (413 above)")
    body_timeout_s: float = Field(10.0, gt=0, description="time a form body may take to arrive, seconds")
    max_in_flight: int = Field(16, ge=1, description="requests served at once before shedding (503)")
    expensive_concurrency: int = Field(
        2, ge=1, description="journey and dead-letter reads running at once; one more answers 503 "
                             "with Retry-After")
    journey_cache_s: float = Field(30.0, ge=0, description="seconds a case's journey read is reused")
    journey_cache_size: int = Field(64, ge=1, description="journeys kept for reuse")
    deadletter_cache_s: float = Field(
        2.0, ge=0, description="seconds the dead-letter counts and a consumer's dead letters read "
                               "are reused (an action of this console refreshes its consumer at once)")
    deadletters_shown: int = Field(
        200, ge=1, description="open dead letters listed on a consumer's page (the oldest first; the "
                               "count above the table is of all of them)")
    rate_client_per_s: float = Field(10.0, gt=0, description="requests per second per signed-in client "
                                                             "(a page's stylesheet and script not counted)")
    rate_client_burst: int = Field(40, ge=1, description="burst of requests per signed-in client")
