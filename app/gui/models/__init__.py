"""The Models and Discover pages: the local library, the Hub's search and model pages, downloads."""
