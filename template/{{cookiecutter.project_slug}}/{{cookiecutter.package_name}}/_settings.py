"""Answers given when this repository was baked (the only templated Python line in the package)."""

PACKAGE, PROVIDER, DEFAULT_MODEL = {{ cookiecutter.package_name | tojson }}, {{ cookiecutter.provider | tojson }}, {{ cookiecutter.default_model | tojson }}  # noqa: E501
