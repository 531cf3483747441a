"""Code World Models: the CWMB environments, their data, and models of them as code."""
