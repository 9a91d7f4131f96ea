"""Agent attempts through Harbor: Terminus-2 trials, the submission mailbox, skills, retries."""
