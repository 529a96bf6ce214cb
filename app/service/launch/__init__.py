"""What starting and feeding an engine needs besides its supervisor: launch overrides, memory checks and budget,
folder (vLLM) plans, embedding companions and the admission queue in front of each engine."""
