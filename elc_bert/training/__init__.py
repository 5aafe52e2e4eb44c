"""What is done with the models: optimisers, schedules and the Trainer jobs."""
