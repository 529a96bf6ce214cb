"""The OpenAI-compatible endpoint (/v1): request checks, chat templates, slot routing and the upstream client."""
