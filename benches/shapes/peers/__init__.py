"""The peers of the shape matrix, one module each: how to build, check and time it on a cell."""
