"""The Settings page: ports, keys, LAN exposure, the Hugging Face token, the theme."""
