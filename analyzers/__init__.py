"""Named analyses over a stored run, and the report / compare renderers."""
