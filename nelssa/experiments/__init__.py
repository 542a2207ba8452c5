"""Experiments and studies: the package code behind scripts/ (each script an argparse shim
over one module here), with the pages' prose in templates beside them (templates/)."""
