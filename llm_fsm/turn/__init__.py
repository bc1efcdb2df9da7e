"""One turn: the loop (``runner``) as a generator of steps (``steps``) over its working state (``working``),
and its units: the prompt, the requests, the reading of a reply (``verdict``), the pure engine, checks,
handlers (``firing``), tool rounds, and how it ends (``outcomes``). The drivers (:mod:`llm_fsm.driving`) run it."""
