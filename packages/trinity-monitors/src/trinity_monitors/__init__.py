"""trinity-monitors: TensorBoard, Weights & Biases and MLflow monitors for trinity."""
