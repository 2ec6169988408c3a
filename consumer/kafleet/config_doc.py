"""``python -m kafleet.config_doc``, the command README gave before the packages: the same as
``python -m kafleet.config.doc`` (the configuration's reference table). Nothing imports it."""

import runpy

if __name__ == "__main__":
    runpy.run_module("kafleet.config.doc", run_name="__main__")
