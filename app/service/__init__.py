"""The headless ModelDeck service: engines, the /v1 gateway and the control API. No Qt here."""
