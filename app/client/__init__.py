"""The control-API client shared by the GUI and the CLI: finds the service, starts it, talks to it.

discovery: where the running service is, and starting one; http: one authenticated connection and its errors;
calls: the typed calls; streams: live events and streamed chats. Import from here, not from those modules.
"""

from app.client.calls import ControlClient
from app.client.discovery import (
    DEFAULT_PORT,
    PORT_ENV,
    StartedService,
    connect,
    default_port,
    find_service,
    port_from_env,
    start_service,
)
from app.client.http import ControlError, ServiceAddress, ServiceUnavailable
from app.client.streams import ChatStream, EventStream, endpoint_tls_context, stream_chat

__all__ = [
    "DEFAULT_PORT",
    "PORT_ENV",
    "ChatStream",
    "ControlClient",
    "ControlError",
    "EventStream",
    "ServiceAddress",
    "ServiceUnavailable",
    "StartedService",
    "connect",
    "default_port",
    "endpoint_tls_context",
    "find_service",
    "port_from_env",
    "start_service",
    "stream_chat",
]
