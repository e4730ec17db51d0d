"""Training and evaluation for the zoo: one trainer (``training.train``, on accelerate) for every method
and stage, one evaluator (``training.evaluate``) with the papers' metrics, synthetic faces
(``zoo.synthetic``) and the distillation recipes for offline identity/landmark networks
(``training.distill``). The method side of the contract is in ``training/PROTOCOL.md``.
"""
