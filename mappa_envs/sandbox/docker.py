"""The Docker backend (see DockerSandbox)."""
from __future__ import annotations

DEFAULT_IMAGE = "mappa-sandbox:latest"


def docker_status(image: str | None = None, docker_url: str | None = None) -> tuple[bool, str]:
    """(usable, why): whether a Docker engine answers and has the sandbox image."""
    try:
        import docker
    except ImportError:
        return False, "the docker SDK is not installed (pip install docker)"
    image = image or DEFAULT_IMAGE
    try:
        client = docker.DockerClient(base_url=docker_url) if docker_url else docker.from_env(timeout=5)
        client.ping()
    except Exception as e:
        return False, f"no Docker engine answers ({type(e).__name__}: {str(e)[:200]}); start dockerd or use the local backend"
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False, f"the Docker engine has no image {image!r}; build it with `mappa sandbox build`"
    except Exception as e:
        return False, f"could not inspect image {image!r}: {e}"
    finally:
        client.close()
    return True, f"Docker engine answers and has image {image!r}"
