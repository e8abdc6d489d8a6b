# The team's config, naming the image's torch.
RUN mkdir -p /etc/team \
 && printf 'torch = "{{ image.torch }}"\n' > /etc/team/config.toml
