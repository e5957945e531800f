"""Exceptions that carry meaning for the runner and the CLI."""


class Unsupported(Exception):
    """This case cannot run here (backend, dtype or device); the reason becomes the record's."""


class SpecError(ValueError):
    """Bad user input: the CLI prints the one-line message and exits with code 2."""


class MissingPackage(SpecError):
    """A command needs a package this install lacks; the message names the pip command."""
