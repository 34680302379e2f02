"""Pictures of a board: the text grid and the SVG."""
