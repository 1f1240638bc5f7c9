"""The watch service's event catalog as a resource package ``watch.schemas`` (pyproject.toml
``package-dir``), so editable and wheel installs find ``catalog.toml`` and the ``.avsc``
files through ``importlib.resources``. No Python code lives here."""
