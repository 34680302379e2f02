"""The command line: ``snl-pbem`` (``main.main``) and its commands; they call ``app``."""
