"""A package, so that its conftest's package-scoped engine ends with the folder's tests."""
