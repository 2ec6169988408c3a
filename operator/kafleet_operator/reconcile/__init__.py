"""Reconciling ConsumerGroups with the world: the passes, their steps and their writes.

Owns: applying a group's objects on its create, update or resume, and when its pause changes
(``applying.py``); the periodic pass over every watched group (``periodic.py``) and one group's
observation (``observer.py``), where its lag comes from (``lag_source.py``), its scaling step
(``autoscaler.py``) and tuning step (``tuner.py``), keeping its objects as its spec says
(``owned.py``), the few writes to the apiserver (``kube.py``) and the operator's own metrics
(``metrics.py``). Decisions are ``policy``'s; reads are ``reading``'s.

Must not import: the kopf handlers (``handlers.py``) or ``main.py``, which call in here.
"""
