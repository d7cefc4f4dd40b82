"""`python -m mcpcache`, for environments where the console script is not on PATH."""

from mcpcache.cli import app

app(prog_name="mcpcache")
