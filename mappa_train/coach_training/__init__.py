"""Training the judge: labelled actions -> a fine-tuned coach model (`mappa coach-train`), and
corrected verdicts -> preference pairs for the policy (`mappa export pairs`).

- `examples`: labelled actions from transcripts (the rule coach's checks), human labels
  (`mappa export labels`) and coach-eval's scripted fault episodes; the split by task.
- `format`: the prompt the LLM coach sends and the reply it parses, for one labelled action.
- `train`: the fine-tune itself (LoRA merged, or full), written as a plain transformers folder.
- `judge`: a model folder scoring requests in-process (greedy reply, the coach's own parse).
- `pairs`: DPO pairs and SFT rows from actions whose verdicts were overruled or differ on one state.
"""
