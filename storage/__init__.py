"""SQLite storage through sqlite-utils: migrations, writes, read queries."""
