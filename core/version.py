from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("malamar")
except PackageNotFoundError:  # running from a checkout that was never installed
    VERSION = "0.0.0+unknown"
