"""HTTP plumbing of the service's two listeners: the /v1 server, raw-ASGI helpers, JSON bodies, TLS, LAN, caps."""
