"""The participant agent: talks to the registry over REST, hosts fragments, runs BPM locally."""
