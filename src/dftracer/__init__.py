"""pydftracer's import path, served by dynascope. See dftracer.python."""
