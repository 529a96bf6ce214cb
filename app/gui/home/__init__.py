"""Home, the first page: the machine at a glance, what is running, and the first-run offer."""
