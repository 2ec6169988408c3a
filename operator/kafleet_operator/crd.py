"""``python -m kafleet_operator.crd``, the command README gave before the packages: the same as
``python -m kafleet_operator.policy.crd`` (the ConsumerGroup CRD). Nothing imports it."""

import runpy

if __name__ == "__main__":
    runpy.run_module("kafleet_operator.policy.crd", run_name="__main__")
