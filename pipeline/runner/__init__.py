"""Recipes, sources, the stage cache and the DAG runner, publishing a build."""
