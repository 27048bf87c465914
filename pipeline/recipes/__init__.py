"""pipeline/recipes"""
