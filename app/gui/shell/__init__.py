"""The main window that holds the pages, its start, tray, notifications and About dialog."""
