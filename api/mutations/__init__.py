"""Mutations: propose, status, effects and rollback (``routes``), a batch of proposals
(``routes_batch``), a check that records nothing (``routes_check``), the list (``routes_list``),
retry and revive (``routes_ops``), an operator's approval (``routes_approval``); their bodies in
``schemas``. What these routes share: the admission of a proposal (``admission``, whose rate limits
governance proposals and GEPA steps use too) and a mutation's record, loaded, authorised and shown
(``records``)."""
