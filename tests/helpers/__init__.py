"""Shared helpers for the kit's tests (importable as ``tests.helpers``)."""
