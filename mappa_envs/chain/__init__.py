"""Chain-v0: `depth` agents each do one step of a multi-step arithmetic problem and pass the value on."""
