"""The live cluster on the wall clock: ``serve`` (HTTP API, WebSocket bus, durable store), ``worker`` and ``submit``."""
