"""The one exception family users see. Every message says what was wrong and what to do."""


class DynascopeError(Exception):
    """Base of every error dynascope raises on purpose. The CLI prints it as one line."""


class ConfigError(DynascopeError, ValueError):
    """A parameter or environment variable has a value dynascope cannot use."""


class SessionError(DynascopeError, RuntimeError):
    """Trace session misuse: finalize twice, an unwritable log directory, and the like."""


class TorchVersionError(DynascopeError, ImportError):
    """torch is missing, too old, or one of its private pieces moved."""


class TraceFormatError(DynascopeError, ValueError):
    """A file given as a trace is not one dynascope can read."""
