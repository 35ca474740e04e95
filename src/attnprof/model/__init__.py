"""The model layer: shapes, the variant registry, the result-set layout, the config and number formats. Imports nothing of the package."""
