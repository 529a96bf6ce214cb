"""The endpoint's other dialects (Anthropic Messages, Ollama, OpenAI Responses): translations over the gateway's
OpenAI core."""
