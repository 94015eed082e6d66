"""The only package that imports prefect: flows, task wrappers, retries."""
