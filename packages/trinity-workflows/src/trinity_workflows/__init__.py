"""trinity-workflows: the workflow and reward-function catalogue for trinity."""
