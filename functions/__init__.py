"""Lambda entry points for Postbox: thin handlers over the `postbox` domain package.

Postbox uses no pydantic plugins, and says so before pydantic's first model: looking for them reads
the entry points of every installed distribution, in each function's cold import.
"""

import os

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
