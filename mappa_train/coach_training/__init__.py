"""Training the judge: labelled actions -> a fine-tuned coach model (`mappa coach-train`), and
corrected verdicts -> preference pairs for the policy (`mappa export pairs`). The prompt, the reply
format and the in-process judge a trained folder becomes are `mappa_envs.coach.judge`.

- `examples`: labelled actions from transcripts (the rule coach's checks), human labels
  (`mappa export labels`) and coach-eval's scripted fault episodes; the split by task.
- `train`: the fine-tune itself (LoRA merged, or full), written as a plain transformers folder.
- `pairs`: DPO pairs and SFT rows from actions whose verdicts were overruled or differ on one state.
"""
