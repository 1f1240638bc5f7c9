"""The suite's event catalog as a resource package.

Setuptools ships this folder as ``services.schemas`` (pyproject.toml ``package-dir``), so an
installed wheel carries ``catalog.toml`` and the ``.avsc`` files, and
``services.schemas_dir()`` finds them through
``importlib.resources.files("services.schemas")`` in editable and wheel installs alike.
No Python code lives here.
"""
