"""The Run page's panels: the selected engine's log, memory, why it died, and client code to call it."""
