"""The setup wizard: this machine, what the user wants, which model, and how the service would run it."""
