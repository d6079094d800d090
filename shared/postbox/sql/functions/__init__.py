"""SQL files of the schema (see README.md); read with importlib.resources."""
