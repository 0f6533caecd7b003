"""Team specs shipped with the package (`<name>.yaml`) and `TeamEnv`, the env `Team-v0` builds from a spec.

    env = mappa_envs.make("Team-v0", spec="review")             # a shipped spec, by name
    env = mappa_envs.make("Team-v0", spec="my_team.yaml")       # or a YAML file, or a dict
"""
