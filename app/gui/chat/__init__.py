"""The Chat page: conversations kept in SQLite, streamed answers, parameters and the model picker."""
