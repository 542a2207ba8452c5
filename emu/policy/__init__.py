"""The policy core (DESIGN.md layer 4): the decisions of paper 4.1-4.3, pure Python over the
hardware description, made here once for the co-simulation (``host/gpu``) and the serving
emulator (``emu/serving``):

- ``states``: tiers, request states, transfers and why a long request stays on the GPU;
- ``router``: split-batch routing by T_input, the latency model's crossover (paper 4.1);
- ``migration``: when a GPU-tier request that has grown past T_input moves to the PNM tier,
  and which one (paper 4.3);
- ``capacity``: the GPU's KV blocks, vLLM-like (admission, growth, preemption victims), and
  what a PNM-tier request keeps on the GPU;
- ``merge``: the log-sum-exp merge of partial attention results (paper 4.2, 6.2);
- ``adaptive``: T_input moved by what an orchestrator observes of the two tiers (issue 26);
- ``budget``: a step's token budget held to the TPOT SLO while requests decode (issue 26, a
  scheduling knob apart from routing; the serving emulator's, both schedulers);
- ``shed``: requests dropped once they have waited past the TTFT SLO without a first token
  (issue 26, an admission knob; the serving emulator's, both schedulers);
- ``slo``: the TTFT and TPOT objective goodput and the two above are held to.
"""
